from crossdock.dev.k8s.cli import main

main()
