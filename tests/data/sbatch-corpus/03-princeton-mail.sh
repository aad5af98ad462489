#!/bin/bash
# crossdock-corpus: Princeton Research Computing's starter script (repeated --mail-type, memory per CPU)
# crossdock-expect: accepted
#SBATCH --job-name=myjob
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=4G
#SBATCH --gres=gpu:1
#SBATCH --time=00:05:00
#SBATCH --mail-type=begin
#SBATCH --mail-type=end
#SBATCH --mail-user=someone@example.org
python myscript.py
