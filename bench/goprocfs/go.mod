module mountwarden.dev/bench/goprocfs

go 1.24.0

require github.com/prometheus/procfs v0.17.0

require golang.org/x/sys v0.33.0 // indirect
