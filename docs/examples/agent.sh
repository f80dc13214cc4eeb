#!/bin/sh
# A stand-in for a coding agent CLI: it is started in the sample's own workspace,
# reads the context file Proctor wrote there, and answers on stdout.
set -eu
question=$1
context=$(cat context.md)
case "$question" in
  *capital*) echo "${context##*capital: }" ;;
  *) echo "I only know capitals" ;;
esac
