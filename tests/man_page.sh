#!/usr/bin/env bash
# man_page.sh -- the CTest test man_page (tests/extra_man.cmake): the manual
# page docs/lockstep.1 cannot drift from the command.
#
# usage: man_page.sh LOCKSTEP MANPAGE
# Fails, naming what is missing, when a subcommand `lockstep --help` lists
# has no section (.SS "lockstep NAME ...") in the page, or an option that
# `lockstep --help` or `lockstep NAME --help` prints does not appear in it,
# or its title line (.TH) names another version than `lockstep --version`;
# and when groff warns about the page (groff -man -ww -z; skipped with a
# note where groff is absent: Debian package groff-base).
set -uo pipefail
lockstep=$1 page=$2
failed=0

if command -v groff >/dev/null; then
    warnings=$(groff -man -ww -z "$page" 2>&1)
    if [ -n "$warnings" ]; then
        echo "man_page: groff warns about $page:"
        echo "$warnings"
        failed=1
    fi
else
    echo "man_page: note: groff not found (Debian package groff-base); roff warnings not checked"
fi

# The page's text with roff's \- read as the hyphen it prints.
text=$(sed 's/\\-/-/g' "$page")

# Options in help text: a word starting with - or -- after a space or ([|,
options_of() {
    grep -oE '(^|[][ (|,])--?[A-Za-z][A-Za-z0-9-]*' | sed -E 's/^[][ (|,]//' | sort -u
}

check_options() { # what (for messages), then the help text on stdin
    local what=$1 option
    while read -r option; do
        if ! grep -qE -- "(^|[^A-Za-z0-9-])${option}([^A-Za-z0-9-]|\$)" <<<"$text"; then
            echo "man_page: $what prints $option, which $page does not mention"
            failed=1
        fi
    done < <(options_of)
}

main_help=$("$lockstep" --help) || { echo "man_page: $lockstep --help failed"; exit 1; }
version=$("$lockstep" --version | awk 'NR == 1 {print $2}')
if ! grep -qE "^\.TH LOCKSTEP 1 .*\"lockstep ${version//./\\.}\"" "$page"; then
    echo "man_page: the .TH line of $page does not say \"lockstep $version\" (lockstep --version)"
    failed=1
fi
check_options "lockstep --help" <<<"$main_help"
commands=$(awk '/^  [a-z]/ {print $1}' <<<"$main_help")
[ -n "$commands" ] || { echo "man_page: no commands in lockstep --help"; exit 1; }
n=0
for command in $commands; do
    n=$((n + 1))
    if ! grep -qE "^\.SS \"?lockstep ${command}( |\"|\$)" <<<"$text"; then
        echo "man_page: $page has no section for 'lockstep $command'"
        failed=1
    fi
    # Help goes to stdout with status 0; a command without --help may print
    # its usage to stderr instead: both are read.
    check_options "lockstep $command --help" < <("$lockstep" "$command" --help 2>&1)
done
if [ "$failed" -ne 0 ]; then
    echo "man_page: FAILED"
    exit 1
fi
echo "man_page: $n commands and their options are all in $page"
