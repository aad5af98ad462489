#!/bin/bash
# crossdock-corpus: TACC's MPI job scripts (short options only, total task count, mail all)
# crossdock-expect: accepted
#SBATCH -J myjob
#SBATCH -o myjob.o%j
#SBATCH -e myjob.e%j
#SBATCH -p normal
#SBATCH -N 4
#SBATCH -n 224
#SBATCH -t 01:30:00
#SBATCH --mail-type=all
#SBATCH -A myproject
ibrun ./mycode.exe
