#!/bin/bash
# crossdock-corpus: A post-processing step that waits on two earlier jobs
# crossdock-expect: accepted
#SBATCH --job-name=post
#SBATCH --dependency=afterok:12345:12346
#SBATCH --time=00:20:00
python collect.py
