#!/bin/bash
# crossdock-corpus: Per-GPU memory and CPUs
# crossdock-expect: accepted
#SBATCH --gpus=4
#SBATCH --cpus-per-gpu=8
#SBATCH --mem-per-gpu=40G
#SBATCH --time=12:00:00
srun python train.py
