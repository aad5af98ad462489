#!/bin/bash
# crossdock-corpus: Array ranges in brackets with a step, as Slurm's parser allows
# crossdock-expect: accepted
#SBATCH --array=[0-15:4]
#SBATCH --ntasks=1
#SBATCH -t 10
echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT
