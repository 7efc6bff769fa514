#!/usr/bin/env bash
# Debian packages the workflow and its tests use when present:
#   wordnet-base + wordnet-sense-index: WordNet 3.0 for machines without NLTK's downloader;
#   slurmctld + slurmd + munge: the single-node cluster of the SLURM test;
#   chromium + chromium-driver: the headless browser of the tests that open the rater sheets
#   and the report (tests/headless_browser.py).
set -euo pipefail
packages=()
[ -f /usr/share/wordnet/data.noun ] || packages+=(wordnet-base)
[ -f /usr/share/wordnet/index.sense ] || packages+=(wordnet-sense-index)
command -v slurmctld >/dev/null || packages+=(slurmctld slurmd slurm-client munge)
[ -x /usr/bin/chromium ] || packages+=(chromium)
[ -x /usr/bin/chromedriver ] || packages+=(chromium-driver)
[ ${#packages[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: not root or no apt-get; skipping Debian packages: ${packages[*]}" >&2
    echo "      (WordNet then comes from NLTK's downloader or config 'wordnet.dict_dir';" >&2
    echo "      the SLURM and browser tests fail without theirs)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
