from vmss_terminate.cli import main

main()
