from crossdock.dev.k8s import main

main()
