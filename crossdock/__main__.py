from crossdock.cli.main import main

main()
