#!/usr/bin/env bash
# Debian packages the workflow and its tests use when present:
#   wordnet-base + wordnet-sense-index: WordNet 3.0 for machines without NLTK's downloader;
#   slurmctld + slurmd + munge: the single-node cluster of the SLURM test.
set -euo pipefail
packages=()
[ -f /usr/share/wordnet/data.noun ] || packages+=(wordnet-base)
[ -f /usr/share/wordnet/index.sense ] || packages+=(wordnet-sense-index)
command -v slurmctld >/dev/null || packages+=(slurmctld slurmd slurm-client munge)
[ ${#packages[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: not root or no apt-get; skipping Debian packages: ${packages[*]}" >&2
    echo "      (WordNet then comes from NLTK's downloader or config 'wordnet.dict_dir')" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
