#!/bin/bash
# crossdock-corpus: Filesystem features required together, quoted
# crossdock-expect: accepted
#SBATCH --constraint="projects&work"
#SBATCH --ntasks=1
#SBATCH --time=1:00:00
./analyse
