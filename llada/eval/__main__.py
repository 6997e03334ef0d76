import sys

if sys.argv[1:2] == ["humaneval"]:  # python -m llada.eval humaneval ... (llada/eval/humaneval.py)
    from .humaneval import main as humaneval_main

    humaneval_main(sys.argv[2:])
else:
    from .harness import main

    main()
