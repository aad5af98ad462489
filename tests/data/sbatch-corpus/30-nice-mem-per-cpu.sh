#!/bin/bash
# crossdock-corpus: A polite low-priority job with memory per CPU in gigabytes
# crossdock-expect: accepted
#SBATCH --nice=100
#SBATCH --mem-per-cpu=2G
#SBATCH -n 8
#SBATCH -t 0-01:00:00
srun ./work
