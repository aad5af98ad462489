#!/bin/bash
# crossdock-corpus: IDRIS Jean Zay's GPU jobs (--hint=nomultithread on every job, feature constraint, %x_%j)
# crossdock-expect: accepted
#SBATCH --job-name=gpu_multi
#SBATCH --qos=qos_gpu-t3
#SBATCH -C v100-32g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=10
#SBATCH --hint=nomultithread
#SBATCH --time=00:10:00
#SBATCH --output=gpu_multi%j.out
#SBATCH --error=gpu_multi%j.err
srun python ./train.py
