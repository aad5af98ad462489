#!/bin/bash
# crossdock-corpus: A heterogeneous job: two components split by 'hetjob'
# crossdock-expect: refused: heterogeneous jobs are not supported
# crossdock-differs: sbatch runs heterogeneous jobs; a crossdock job is one component
#SBATCH --ntasks=1 --cpus-per-task=4
#SBATCH hetjob
#SBATCH --ntasks=8 --cpus-per-task=1
srun --het-group=0 ./server : --het-group=1 ./client
