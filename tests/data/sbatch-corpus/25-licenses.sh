#!/bin/bash
# crossdock-corpus: Counted licenses
# crossdock-expect: accepted
#SBATCH --licenses=matlab:1,simulink:1
#SBATCH -t 30
matlab -batch run
