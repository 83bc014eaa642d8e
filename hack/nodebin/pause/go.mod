module mountwarden.dev/nodebin/pause

go 1.24.0
