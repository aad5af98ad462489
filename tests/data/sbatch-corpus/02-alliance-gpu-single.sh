#!/bin/bash
# crossdock-corpus: The Digital Research Alliance of Canada's single-GPU example form (typed gres, MiB, day-hours time)
# crossdock-expect: accepted
#SBATCH --account=def-someuser
#SBATCH --gres=gpu:v100l:1
#SBATCH --cpus-per-task=6
#SBATCH --mem=32000M
#SBATCH --time=0-03:00
python train.py
