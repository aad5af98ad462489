#!/bin/bash
# crossdock-corpus: A checkpointing job: USR1 to the batch shell five minutes before the limit, requeued
# crossdock-expect: accepted
#SBATCH --job-name=ckpt
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
trap 'touch checkpoint.request' USR1
python train.py --resume &
wait
