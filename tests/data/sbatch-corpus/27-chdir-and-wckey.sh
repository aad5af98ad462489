#!/bin/bash
# crossdock-corpus: Working directory, accounting key and comment
# crossdock-expect: accepted
#SBATCH --chdir=/tmp
#SBATCH --wckey=projx
#SBATCH --comment="nightly build"
make -j
