#!/bin/sh
# The timeline page, loaded in headless Chromium: the demo's trace renders one box per event
# (counted by the page's own script after loading) and the communication table lists the
# block's all_gathers and reduce_scatters. Skipped (77) without Chromium.
set -u
demo="$1"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no chromium: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$demo" "$dir" > "$dir/demo.out" 2>&1 || { cat "$dir/demo.out"; exit 1; }
[ -s "$dir/dtensor_timeline.html" ] || { echo "no timeline page written"; exit 1; }
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$dir/profile" \
    --dump-dom "file://$dir/dtensor_timeline.html" > "$dir/dom.html" 2> "$dir/browser.err" ||
    { cat "$dir/browser.err"; exit 1; }
events=$(sed -n 's/.*<span id="nevents">\([0-9]*\)<\/span>.*/\1/p' "$dir/dom.html" | head -n 1)
drawn=$(sed -n 's/.*<span id="drawn">\([0-9]*\)<\/span>.*/\1/p' "$dir/dom.html" | head -n 1)
echo "events listed: $events, boxes drawn by the page: $drawn"
[ -n "$events" ] && [ "$events" -gt 0 ] || { echo "no events in the page"; exit 1; }
[ "$drawn" = "$events" ] || { echo "the page drew $drawn boxes for $events events"; exit 1; }
grep -q '<td>all_gather</td>' "$dir/dom.html" || { echo "no all_gather row"; exit 1; }
grep -q '<td>reduce_scatter</td>' "$dir/dom.html" || { echo "no reduce_scatter row"; exit 1; }
ranks=$(grep -o '<text x="0" y="[0-9.]*" font-weight="bold">rank [0-9]*</text>' "$dir/dom.html" | wc -l)
[ "$ranks" -eq 4 ] || { echo "expected 4 rank lanes, found $ranks"; exit 1; }
echo "timeline renders: $drawn boxes on $ranks ranks"
