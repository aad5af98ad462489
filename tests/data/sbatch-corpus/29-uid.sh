#!/bin/bash
# crossdock-corpus: Submitting as another user (root only in Slurm)
# crossdock-expect: refused: crossdock does not take --uid
# crossdock-differs: in Slurm root may submit for another uid; crossdock runs every job as its submitter
#SBATCH --uid=1000
id
