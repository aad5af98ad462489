#!/bin/bash
# crossdock-corpus: Directives switched off with extra #, a double blank after #SBATCH
# crossdock-expect: accepted
#SBATCH --job-name=testrun
##SBATCH --qos=testing
#####SBATCH -p new
#SBATCH  --output=testout.out
#SBATCH --ntasks=4
#SBATCH --time=24:00:00
mpirun ./lmp -in in.lrt
