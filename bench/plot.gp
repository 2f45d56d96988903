# dsv4-bench: latency and throughput against concurrency (gnuplot >= 5.0).
#
#   gnuplot -c bench/plot.gp DATA [OUT.png] [TITLE]
#
# DATA is the file dsv4-bench writes with --plot-data FILE (or next to --plot OUT.png):
# one block per DSpark mode (index 0: DSpark off; index 1: on, when it ran), columns
#   1 C  2 ttft_med_ms  3 ttft_p90_ms  4 itl_med_ms  5 itl_p90_ms  6 output_tok_s
#   7 decode_tok_s  8 step_ms (engine)  9 floor_ms (bytes / copy bandwidth)  10 acceptance
#   11 repeat
# ITL is token-attributed (a step that emits k tokens counts k tokens of step/k).

if (ARGC < 1) { print "usage: gnuplot -c plot.gp DATA [OUT.png] [TITLE]"; exit status 2 }
data = ARG1
out = (ARGC >= 2 && strlen(ARG2) > 0) ? ARG2 : "bench.png"
title = (ARGC >= 3) ? ARG3 : "dsv4-bench"

stats data using 1 nooutput
nblocks = STATS_blocks
modes = "no-DSpark DSpark"
colors = "#8b00c9 #009e73"   # one colour per mode; the metric is told by dash and point type

set terminal pngcairo size 1800,560 font "sans,10"
set output out
set multiplot layout 1,3 title title font ",12"
set logscale x 2
set xlabel "concurrency C (sequences decoded together)"
set grid
set key top left
set offsets graph 0.05, graph 0.05, 0, 0

set title "Latency (ms, log scale)"
set ylabel "ms"
set logscale y
plot for [i=0:nblocks-1] data index i using 1:4 with linespoints lc rgb word(colors, i+1) lw 2 pt 7 \
       title sprintf("ITL median, %s", word(modes, i+1)), \
     for [i=0:nblocks-1] data index i using 1:5 with linespoints lc rgb word(colors, i+1) lw 1 dt 2 pt 6 \
       title sprintf("ITL p90, %s", word(modes, i+1)), \
     for [i=0:nblocks-1] data index i using 1:2 with linespoints lc rgb word(colors, i+1) lw 1.5 dt 4 pt 5 \
       title sprintf("TTFT median, %s", word(modes, i+1))
unset logscale y

set title "Aggregate throughput (tokens/s)"
set ylabel "tokens / s"
set yrange [0:*]
plot for [i=0:nblocks-1] data index i using 1:7 with linespoints lc rgb word(colors, i+1) lw 2 pt 7 \
       title sprintf("decode phase, %s", word(modes, i+1)), \
     for [i=0:nblocks-1] data index i using 1:6 with linespoints lc rgb word(colors, i+1) lw 1 dt 2 pt 6 \
       title sprintf("whole run (prefill incl.), %s", word(modes, i+1))

set title "Decode step vs bytes-touched floor (ms, log scale)"
set ylabel "ms per step"
set y2label "step / floor"
set y2tics
set ytics nomirror
set logscale y
set logscale y2
set yrange [*:*]
set y2range [*:*]
plot for [i=0:nblocks-1] data index i using 1:8 with linespoints lc rgb word(colors, i+1) lw 2 pt 7 \
       title sprintf("engine step, %s", word(modes, i+1)), \
     for [i=0:nblocks-1] data index i using 1:9 with linespoints lc rgb word(colors, i+1) lw 2 dt 2 pt 6 \
       title sprintf("floor = bytes / copy BW, %s", word(modes, i+1)), \
     for [i=0:nblocks-1] data index i using 1:($8/$9) axes x1y2 with linespoints lc rgb word(colors, i+1) lw 1 dt 3 pt 4 \
       title sprintf("step / floor (right axis), %s", word(modes, i+1))
unset multiplot
