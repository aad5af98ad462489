#!/bin/bash
# crossdock-corpus: One instance at a time of a named job (singleton), killed if a dependency can never be met
# crossdock-expect: accepted
#SBATCH --job-name=nightly
#SBATCH --dependency=singleton
#SBATCH --kill-on-invalid-dep=yes
#SBATCH -t 60
./nightly.sh
