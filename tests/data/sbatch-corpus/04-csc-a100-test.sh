#!/bin/bash
# crossdock-corpus: CSC's PyTorch DDP examples (project account, gputest partition, whole-node memory, minutes)
# crossdock-expect: accepted
#SBATCH --account=project_2000000
#SBATCH --partition=gputest
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=40
#SBATCH --mem=0
#SBATCH --time=15
#SBATCH --gres=gpu:a100:4
srun python3 -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=4 train.py
