#!/usr/bin/env bash
# apicount.sh counts the exported names of gated's public packages, as
# go doc -all shows them: types, functions, methods, constants and
# variables (each name of a const or var block counts once).
#
#   bash test/apicount.sh [package ...]
#
# With no package it counts those docs/API.md lists as public.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	pkgs=(. ./engine/wire ./engine/grant ./bus/fleet ./plugins/sdk ./mcpgate)
fi
printf '%-16s %6s %6s %8s %6s %6s %6s\n' package types funcs methods consts vars total
for p in "${pkgs[@]}"; do
	name=${p#./}
	[ "$name" = . ] && name=gated
	go doc -all "$p" | awk -v pkg="$name" '
		/^(const|var) \($/ { block = $1; next }
		block != "" && /^\)/ { block = ""; next }
		block != "" {
			if ($0 ~ /^\t[A-Z][A-Za-z0-9_]*/) {
				line = substr($0, 2); sub(/[ =].*/, "", line)
				n = split(line, names, ",")
				if (block == "const") c += n; else v += n
			}
			next
		}
		/^const [A-Z]/ { c++; next }
		/^var [A-Z]/ { v++; next }
		/^type [A-Z]/ { t++; next }
		/^func \(/ { m++; next }
		/^func [A-Z]/ { f++; next }
		END { printf "%-16s %6d %6d %8d %6d %6d %6d\n", pkg, t, f, m, c, v, t + f + m + c + v }
	'
done
