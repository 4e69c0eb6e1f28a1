# Sourced by the shell scripts after they cd to the checkout: the Python that runs speccond, checked first.
# SPECCOND_PYTHON names it (default: python3 on PATH: activate the environment first, `. .venv/bin/activate`,
# or run the script through `./run script scripts/NAME.sh ...`). SPECCOND_SRC runs another checkout's
# sources (a pinned copy, while this one is edited).
[ -n "$SPECCOND_SRC" ] && export PYTHONPATH="$SPECCOND_SRC"
py=${SPECCOND_PYTHON:-python3}
if ! "$py" -c "import speccond.harness" 2>/dev/null; then
  echo "$0: '$py' cannot import speccond; activate its environment (. .venv/bin/activate), run it as" \
       "./run script $0, or set SPECCOND_PYTHON to its interpreter" >&2
  exit 2
fi
speccond() { "$py" -m speccond "$@"; }
