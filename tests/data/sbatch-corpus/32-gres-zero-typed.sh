#!/bin/bash
# crossdock-corpus: A typed GPU request of count 0 on a CPU step
# crossdock-expect: accepted
#SBATCH --gres=gpu:a100:0
#SBATCH -n 2
srun hostname
