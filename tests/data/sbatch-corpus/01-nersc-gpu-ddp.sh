#!/bin/bash
# crossdock-corpus: NERSC Perlmutter's GPU job layout (account, -C gpu, QOS, per-node GPUs)
# crossdock-expect: accepted
#SBATCH -A m0000_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -t 2:00:00
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH -c 32
#SBATCH --gpus-per-node=4
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --cpu-bind=cores python train.py
