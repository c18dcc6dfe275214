module s3arch/bench/synthetic_s3

// The standard library only: building needs no module download.
go 1.24
