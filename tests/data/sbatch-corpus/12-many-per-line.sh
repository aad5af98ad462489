#!/bin/bash
# crossdock-corpus: Several options on one #SBATCH line, as many lab scripts write them
# crossdock-expect: accepted
#SBATCH -t 48:00:00
#SBATCH -N 1
#SBATCH -p gpu --gres=gpu:1 --mem-per-cpu=3100 --ntasks-per-node=5
python full_run.py "$@"
