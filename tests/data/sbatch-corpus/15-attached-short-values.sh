#!/bin/bash
# crossdock-corpus: Short options with attached values (-c4) and blank-separated long values (--gpus 1)
# crossdock-expect: accepted
#SBATCH -c4 --mem=16g
#SBATCH --gpus 1
#SBATCH -p cs
torchrun src/model.py
