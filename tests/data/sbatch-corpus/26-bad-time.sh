#!/bin/bash
# crossdock-corpus: A time limit in seconds with a unit, which Slurm does not read
# crossdock-expect: refused: --time: invalid value '5s'
#SBATCH --time=5s
true
