from vmss_terminate.entry import main

main()
