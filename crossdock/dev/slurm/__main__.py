from crossdock.dev.slurm import main

main()
