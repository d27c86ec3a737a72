#!/usr/bin/env bash
# The project's C++/CUDA formatting (.clang-format, Debian 12's clang-format 14).
#   scripts/format.sh           formats every tracked .h/.cpp/.cu/.cuh file in place
#   scripts/format.sh --check   changes nothing; lists the files that differ, exits 1 if any
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TANDEM_ROOT"

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "format.sh: unknown argument '$1' (use --check, or nothing to format in place)" >&2; exit 2 ;;
esac

command -v clang-format >/dev/null 2>&1 || bash scripts/setup.sh
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "$check" = 0 ]; then
  clang-format -i "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files with $(clang-format --version)"
  exit 0
fi
differ=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || differ+=("$f")
done
if [ ${#differ[@]} -gt 0 ]; then
  echo "format.sh: ${#differ[@]} of ${#files[@]} files differ from .clang-format (run scripts/format.sh):" >&2
  printf '  %s\n' "${differ[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files follow .clang-format"
