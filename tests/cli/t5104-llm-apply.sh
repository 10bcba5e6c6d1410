#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What a model's reply may write (atb llm apply): the task's surface files
# inside the candidate folder, and nothing else.  Planted replies
# (tests/fixtures/cheats/llm-replies) try path traversal, absolute paths,
# folders, hidden files, files outside the surface, a name twice, a good
# file beside a bad one, a symlink planted in the folder, an oversize file:
# each is refused with exit 2 and nothing written, in the folder or outside.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
R=$ATB_SOURCE_DIR/tests/fixtures/cheats/llm-replies

# fresh: an empty candidate folder cand/ inside a sandbox folder box/
fresh() { rm -rf box && mkdir -p box/a/b/cand && echo precious >box/a/b/victim.c; }
# untouched: cand/ is empty and victim.c is as it was
untouched() { test -z "$(ls -A box/a/b/cand)" && test "$(cat box/a/b/victim.c)" = precious &&
	test ! -e /tmp/atb-victim.c && test ! -e box/a/victim.c; }
apply() { "$ATB" llm apply --into box/a/b/cand --file kernel.c "$@"; }

test_expect "an honest reply writes its surface file, byte for byte" '
	fresh && apply --reply "$R/honest.md" --json >out &&
	sed -n "/^\`\`\`c kernel.c$/,/^\`\`\`$/p" "$R/honest.md" | sed "1d;\$d" >want &&
	cmp want box/a/b/cand/kernel.c &&
	jq -e ".files == [{\"name\": \"kernel.c\", \"bytes\": $(wc -c <want), \"diff\": false}]" out &&
	fresh && apply --reply "$R/unnamed.md" && test "$(cat box/a/b/cand/kernel.c)" = "int only_file;" &&
	fresh && apply --reply "$R/json-honest.json" --format json && test "$(cat box/a/b/cand/kernel.c)" = "int fine;"
'

for cheat in traversal absolute folder hidden not-surface duplicate partial; do
	test_expect "planted reply $cheat.md is refused, nothing written" '
		fresh && expect_exit 2 apply --reply "$R/'$cheat'.md" && untouched
	'
done

test_expect "a traversal in the json format is refused too" '
	fresh && expect_exit 2 apply --reply "$R/json-traversal.json" --format json && untouched &&
	expect_grep "climbs out of the candidate folder" "$TRASH/err"
'

test_expect "an unnamed block is refused when the surface has two files" '
	fresh && expect_exit 2 "$ATB" llm apply --into box/a/b/cand --file kernel.c --file kernel.h \
		--reply "$R/unnamed.md" && untouched && expect_grep "without a file name" "$TRASH/err"
'

test_expect "a symlink planted under the surface name is not written through" '
	fresh && ln -s ../victim.c box/a/b/cand/kernel.c &&
	expect_exit 2 apply --reply "$R/honest.md" && expect_grep "is a symlink" "$TRASH/err" &&
	test -L box/a/b/cand/kernel.c && test "$(cat box/a/b/victim.c)" = precious &&
	test "$(ls -A box/a/b/cand)" = kernel.c
'

test_expect "a candidate folder that is a symlink is refused" '
	fresh && ln -s a/b box/link && expect_exit 2 "$ATB" llm apply --into box/link --file kernel.c \
		--reply "$R/honest.md" && test ! -e box/a/b/kernel.c
'

test_expect "an oversize file is refused" '
	fresh && { echo "\`\`\`c kernel.c"; head -c 1100000 /dev/zero | tr "\\0" x; echo; echo "\`\`\`"; } >big.md &&
	expect_exit 2 apply --reply big.md && untouched && expect_grep "over the 1048576 allowed" "$TRASH/err"
'

# based: cand/ holds diff-base.c.txt as kernel.c (what a diff is against)
based() { fresh && cp "$R/diff-base.c.txt" box/a/b/cand/kernel.c; }
# unchanged: cand/ holds only kernel.c, still diff-base.c.txt, and victim.c is as it was
unchanged() { cmp "$R/diff-base.c.txt" box/a/b/cand/kernel.c && test "$(ls -A box/a/b/cand)" = kernel.c &&
	test "$(cat box/a/b/victim.c)" = precious && test ! -e /tmp/atb-victim.c; }

test_expect "a unified diff is applied to the file in the folder, byte for byte" '
	based && apply --reply "$R/diff-honest.md" --json >out && cmp "$R/diff-want.c.txt" box/a/b/cand/kernel.c &&
	jq -e ".files == [{\"name\": \"kernel.c\", \"bytes\": $(wc -c <"$R/diff-want.c.txt"), \"diff\": true}]" out &&
	test "$(ls -A box/a/b/cand)" = kernel.c
'

test_expect "a diff with miscounted line numbers and bare blank context lines applies the same" '
	based && apply --reply "$R/diff-offset.md" && cmp "$R/diff-want.c.txt" box/a/b/cand/kernel.c
'

for cheat in traversal absolute delete stale counts partial; do
	test_expect "planted diff diff-$cheat.md is refused, nothing written" '
		based && expect_exit 2 apply --reply "$R/diff-'$cheat'.md" && unchanged
	'
done

test_expect "the diffs refused say why" '
	based && expect_exit 2 apply --reply "$R/diff-traversal.md" &&
	expect_grep "climbs out of the candidate folder" "$TRASH/err" &&
	based && expect_exit 2 apply --reply "$R/diff-delete.md" && expect_grep "deletes a file" "$TRASH/err" &&
	based && expect_exit 2 apply --reply "$R/diff-stale.md" &&
	expect_grep "hunk 2 (@@ -6,7 +8,8 @@): its old lines are not in the file (at line 9 the first that differs: " "$TRASH/err" && expect_grep "for (i = 0; i < n; i += 1)" "$TRASH/err" &&
	based && expect_exit 2 apply --reply "$R/diff-counts.md" &&
	expect_grep "its header counts 9 old and 11 new lines, its body has 3 and 5" "$TRASH/err" &&
	based && expect_exit 2 apply --reply "$R/diff-partial.md" &&
	expect_grep "not a surface file" "$TRASH/err"
'

test_expect "a diff for a file the folder lacks, or one that creates a file it has, is refused" '
	fresh && expect_exit 2 apply --reply "$R/diff-honest.md" && untouched &&
	expect_grep "does not have" "$TRASH/err" &&
	printf "\`\`\`diff\n--- /dev/null\n+++ b/kernel.c\n@@ -0,0 +1 @@\n+int fresh;\n\`\`\`\n" >create.md &&
	fresh && apply --reply create.md && test "$(cat box/a/b/cand/kernel.c)" = "int fresh;" &&
	based && expect_exit 2 apply --reply create.md && unchanged && expect_grep "already has" "$TRASH/err"
'

test_expect "a diff through a symlink planted under the surface name is refused" '
	fresh && cp "$R/diff-base.c.txt" box/a/b/victim.c && ln -s ../victim.c box/a/b/cand/kernel.c &&
	expect_exit 2 apply --reply "$R/diff-honest.md" && expect_grep "is a symlink" "$TRASH/err" &&
	cmp "$R/diff-base.c.txt" box/a/b/victim.c
'

test_done
