#!/bin/bash
# crossdock-corpus: A node range required by host list
# crossdock-expect: accepted
#SBATCH --job-name=GPU-torchrun
#SBATCH --mem=10G
#SBATCH --nodes=2
#SBATCH --gres=gpu:2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --nodelist=gpu[170-171]
#SBATCH --output=logs/%x.%j.log
srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node=2 train.py
