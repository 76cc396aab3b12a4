#!/bin/sh
# The demo's agent command: a stand-in for a coding agent. It reads the task
# from $AWCP_PROMPT (also on stdin), works in the current directory, prints
# progress on stdout and leaves a summary in $AWCP_SUMMARY_FILE.
set -e
echo "task: $AWCP_PROMPT"
echo "making src/greet.sh executable"
chmod +x src/greet.sh
echo "adding a test"
mkdir -p test
cat > test/greet_test.sh <<'T'
#!/bin/sh
out=$(sh "$(dirname "$0")/../src/greet.sh" world)
[ "$out" = "hello, world" ] && echo PASS || { echo FAIL; exit 1; }
T
chmod +x test/greet_test.sh
echo "running it: $(sh test/greet_test.sh)"
rm TODO.txt
echo "Made src/greet.sh executable, added test/greet_test.sh (passing), removed the finished TODO.txt." > "$AWCP_SUMMARY_FILE"
