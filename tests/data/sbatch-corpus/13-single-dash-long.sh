#!/bin/bash
# crossdock-corpus: A long option written with one dash: getopt reads -t and the rest as its value, and sbatch refuses the time
# crossdock-expect: refused: -t: invalid value 'asks-per-node=5'
#SBATCH -N 1
#SBATCH -tasks-per-node=5
python run.py
