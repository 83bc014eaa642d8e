module mountwarden.dev/bench/nullwebhook

go 1.24.0
