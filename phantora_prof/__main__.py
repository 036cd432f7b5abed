from phantora_prof.cli import main

main()
