from askalike.app.cli import main

main()
