#!/bin/bash
# crossdock-corpus: A directive after the first command: sbatch reads directives only before it
# crossdock-expect: accepted
#SBATCH -t 10
echo start
#SBATCH --partition=ignored-by-sbatch
