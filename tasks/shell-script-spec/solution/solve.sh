#!/usr/bin/env bash
# Reference solution: write /app/wordfreq.sh (coreutils + awk only).
set -euo pipefail
cat > /app/wordfreq.sh <<'SCRIPT'
#!/usr/bin/env bash
# wordfreq.sh [-n N] [-i] [FILE...] — most frequent words of the input.
export LC_ALL=C
usage() {
    [ $# -gt 0 ] && echo "wordfreq.sh: $*" >&2
    echo "usage: wordfreq.sh [-n N] [-i] [FILE...]" >&2
    exit 2
}
n=10
fold=0
while getopts ":n:i" opt; do
    case $opt in
        n) n=$OPTARG ;;
        i) fold=1 ;;
        :) usage "option -$OPTARG needs a value" ;;
        *) usage "unknown option -$OPTARG" ;;
    esac
done
shift $((OPTIND - 1))
if ! [[ $n =~ ^[0-9]+$ ]] || ((10#$n == 0)); then
    usage "N must be a positive integer, got '$n'"
fi
n=$((10#$n))
[ $# -eq 0 ] && set -- -
for f in "$@"; do
    if [ "$f" != - ] && { [ ! -f "$f" ] || [ ! -r "$f" ]; }; then
        echo "wordfreq.sh: cannot read '$f'" >&2
        exit 1
    fi
done
cat -- "$@" \
    | tr -cs 'A-Za-z' '\n' \
    | if [ "$fold" -eq 1 ]; then tr 'A-Z' 'a-z'; else cat; fi \
    | awk 'NF { c[$0]++ } END { for (w in c) print c[w], w }' \
    | sort -k1,1nr -k2,2 \
    | head -n "$n"
exit 0
SCRIPT
chmod +x /app/wordfreq.sh
/app/wordfreq.sh -i -n 3 /app/sample.txt
