#!/bin/bash
# crossdock-corpus: Both --mem and --mem-per-cpu: sbatch refuses the pair
# crossdock-expect: refused: one of --mem and --mem-per-cpu, not both
#SBATCH --mem=4G
#SBATCH --mem-per-cpu=1G
true
