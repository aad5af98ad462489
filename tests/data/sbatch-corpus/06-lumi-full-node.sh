#!/bin/bash
# crossdock-corpus: LUMI-G's full-node GPU jobs (8 GPUs, 8 tasks per node, exclusive, all memory)
# crossdock-expect: accepted
#SBATCH --job-name=examplejob
#SBATCH --output=examplejob.o%j
#SBATCH --error=examplejob.e%j
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --time=1-12:00:00
#SBATCH --account=project_465000000
srun ./select_gpu ./myapp
