from crossdock.dev.slurm.cli import main

main()
