#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb box on a GPU machine: NVML (dlopen'ed) must see the same GPUs, UUIDs
# and driver as nvidia-smi.  Skipped where there is no NVIDIA driver; the
# GPU machine runs it.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed to read the JSON"
command -v nvidia-smi >/dev/null || skip_all "no nvidia-smi: not a GPU machine"
nvidia-smi --query-gpu=uuid --format=csv,noheader >/dev/null 2>&1 ||
	skip_all "nvidia-smi cannot query GPUs here"

test_expect "atb box lists the GPUs nvidia-smi lists" '
	nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total \
		--format=csv,noheader,nounits >smi.csv &&
	expect_exit 0 "$ATB" --json box && cp "$TRASH/out" box.json &&
	python3 -c "
import csv, json
box = json.load(open(\"box.json\"))
rows = [[c.strip() for c in r] for r in csv.reader(open(\"smi.csv\")) if r]
assert box[\"volatile\"][\"gpu_probe\"] == \"ok\", box[\"volatile\"][\"gpu_probe\"]
assert len(box[\"gpus\"]) == len(rows), (len(box[\"gpus\"]), len(rows))
for g, (idx, uuid, name, driver, mem_mib) in zip(box[\"gpus\"], rows):
    assert g[\"index\"] == int(idx), (g, idx)
    assert g[\"uuid\"] == uuid, (g[\"uuid\"], uuid)
    assert g[\"name\"] == name, (g[\"name\"], name)
    assert abs(g[\"memory_total_bytes\"] / 2**20 - float(mem_mib)) < 2, (g, mem_mib)
    assert g[\"sm_clock_max_mhz\"] and g[\"mem_clock_max_mhz\"], g
    assert box[\"gpu_driver_version\"] == driver, (box[\"gpu_driver_version\"], driver)
assert box[\"cuda_driver_version\"] and box[\"cuda_driver_version\"] >= 10000
ids = box[\"identity\"][\"gpus\"]
assert [(i[\"name\"], i[\"uuid\"]) for i in ids] == [(g[\"name\"], g[\"uuid\"]) for g in box[\"gpus\"]]
for v in box[\"volatile\"][\"gpus\"]:
    assert v[\"sm_clock_mhz\"] is not None and v[\"persistence_mode\"] in (True, False), v
print(\"gpus:\", len(rows), \"driver:\", box[\"gpu_driver_version\"], \"cuda:\", box[\"cuda_driver_version\"])
"
'

test_expect "the GPU fingerprint is stable and differs from the no-GPU one" '
	a=$("$ATB" box --fingerprint) && b=$("$ATB" box --fingerprint) &&
	c=$(ATB_NVML_LIBRARY=/nonexistent "$ATB" box --fingerprint) &&
	test "$a" = "$b" && test "$a" != "$c"
'

test_expect "the text form shows each GPU" '
	expect_exit 0 "$ATB" box &&
	expect_grep "gpu driver   " "$TRASH/out" &&
	expect_grep "gpu 0 " "$TRASH/out"
'

test_done
