#!/bin/bash
# crossdock-corpus: An MPI job that pins its layout: one task per core, block distribution
# crossdock-expect: accepted
#SBATCH --ntasks=64
#SBATCH --ntasks-per-core=1
#SBATCH --distribution=block:block
#SBATCH --time=02:00:00
srun ./solver
