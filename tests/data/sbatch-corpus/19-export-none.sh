#!/bin/bash
# crossdock-corpus: A clean environment (--export=NONE) with the login environment asked for
# crossdock-expect: accepted
#SBATCH --export=NONE
#SBATCH --get-user-env
#SBATCH --ntasks=1
env | sort
