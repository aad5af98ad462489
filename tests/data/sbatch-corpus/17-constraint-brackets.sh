#!/bin/bash
# crossdock-corpus: A matching-OR constraint in brackets: all nodes of one of the features
# crossdock-expect: accepted
#SBATCH -p short
#SBATCH -t 04:00:00
#SBATCH --constraint=[ivb|hsw]
#SBATCH -n 1
#SBATCH --mem=2000
#SBATCH --array=156,230,246
#SBATCH -o out/out-%a.out
srun Rscript --vanilla run.R "$SLURM_ARRAY_TASK_ID"
