# compare.png from the data files bench/report.py writes: gnuplot -e "dir='D'; out='F'" plot.gp
# Four panels: hit latency by size, hit throughput by size (16 clients), lookup latency by store
# size, coalescing. Log scales where the values span decades.
set terminal pngcairo size 1400,1000 font "sans,10"
set output out
set multiplot layout 2,2 title "kcache beside Redis (bench/run.sh; one run, ratios matter more than absolutes)"
set grid
set key top left
set datafile missing "NaN"

set title "Hit path: p50 latency per request"
set logscale xy
set autoscale xfix
set offsets graph 0.05, graph 0.05, 0, 0
set xlabel "image size"
set ylabel "p50 (us)"
plot dir."/hit.dat" using 1:2:xtic(8) with linespoints lw 2 pt 7 title "kcached Fetch, 1 client", \
     ""             using 1:3 with linespoints lw 2 pt 5 title "Redis GET, 1 client", \
     ""             using 1:4 with linespoints lw 2 pt 6 dt 2 title "kcached Fetch, 16 clients", \
     ""             using 1:5 with linespoints lw 2 pt 4 dt 2 title "Redis GET, 16 clients"

set title "Hit path: throughput with 16 clients"
set ylabel "MiB/s"
plot dir."/hit.dat" using 1:6:xtic(8) with linespoints lw 2 pt 7 title "kcached Fetch", \
     ""             using 1:7 with linespoints lw 2 pt 5 title "Redis GET"

set title "Scale: latency against entries in the store (1-4 KiB images)"
set xtics auto
set key bottom right
set xlabel "entries"
set ylabel "us"
set format x "10^{%L}"
plot dir."/scale.dat" using 1:2 with linespoints lw 2 pt 7 title "kcached Lookup p50 (client)", \
     ""               using 1:3 with linespoints lw 2 pt 5 title "kcached Fetch p50 (client)", \
     ""               using 1:4 with linespoints lw 2 pt 6 dt 2 title "Store::list mean (store API)", \
     ""               using 1:5 with linespoints lw 2 pt 4 dt 2 title "Store::get mean (store API)"

set title "Coalescing: N identical concurrent compiles"
unset logscale y
set logscale y2
set format x "%g"
set xlabel "concurrent identical compiles (N)"
set ylabel "wall ms"
set y2label "compiles"
set y2tics
set yrange [0:*]
set y2range [0.5:*]
set key top left
plot dir."/coalesce.dat" using 1:2:xtic(1) with linespoints lw 2 pt 7 title "wall time (ms)", \
     ""                  using 1:3 axes x1y2 with linespoints lw 2 pt 5 title "compiles performed (GetStats)", \
     ""                  using 1:1 axes x1y2 with lines lw 1 dt 3 title "compiles without coalescing (N)"
unset multiplot
