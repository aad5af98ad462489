#!/bin/bash
# crossdock-corpus: An array of 100 tasks, ten at a time, one log per task (%A_%a)
# crossdock-expect: accepted
#SBATCH --job-name=sweep
#SBATCH --array=1-100%10
#SBATCH --output=logs/%A_%a.out
#SBATCH --time=00:30:00
#SBATCH --mem=2G
python sweep.py --index "$SLURM_ARRAY_TASK_ID"
