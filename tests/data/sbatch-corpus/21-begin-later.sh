#!/bin/bash
# crossdock-corpus: Deferred start
# crossdock-expect: accepted
#SBATCH --begin=now+1hour
#SBATCH -t 5
./report.sh
