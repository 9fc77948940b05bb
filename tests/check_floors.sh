#!/usr/bin/env bash
# The floors of docs/architecture.md, checked on the sources: each folder includes only wsync headers of the floors
# below it (and its own). bus/ sees the schemas; a role sees bus/ and never another role; capi/ sees the roles;
# nothing below tools/ and bench/ includes their headers. Prints every include that runs up a floor or across the
# roles and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# check FOLDER ALLOWED...: every '#include "wsync/X/...' or '<wsync/X/...' under FOLDER has X among ALLOWED.
status=0
check() {
  local folder="$1"; shift
  local allowed="$*" line part
  while IFS= read -r line; do
    part=$(sed -E 's#.*[<"]wsync/([a-z_]+)/.*#\1#' <<<"${line#*:*:}")
    if [[ " $allowed " != *" $part "* ]]; then
      echo "check_floors: $line: $folder/ may include wsync/{${allowed// /,}}/ only"
      status=1
    fi
  done < <(grep -rnE '#include [<"]wsync/[a-z_]+/' "$folder" --include='*.cpp' --include='*.hpp' --include='*.cu' \
             --include='*.h' --include='*.c' || true)
}
check bus bus schemas
check coordinator coordinator bus schemas
check trainer_agent trainer_agent bus schemas
check worker_agent worker_agent bus schemas
check capi coordinator trainer_agent worker_agent bus schemas
check tools cli mon coordinator trainer_agent worker_agent bus schemas
((status == 0)) && echo "check_floors: no include runs up a floor or across the roles"
exit "$status"
